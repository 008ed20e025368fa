# Ray's Counter actor, from its walkthrough, as Ray code: only the import differs
import scaler.compat.ray as ray  # was: import ray

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value

    def get_counter(self):
        return self.value


# Create an actor from this class.
counter = Counter.remote()

# Calls of one actor run in order, on its state.
print(ray.get([counter.increment.remote() for _ in range(3)]))  # [1, 2, 3]

# Several actors, each with state of its own.
counters = [Counter.remote() for _ in range(4)]
print(ray.get([c.increment.remote() for c in counters]))  # [1, 1, 1, 1]
print(ray.get(counter.get_counter.remote()))  # 3

ray.shutdown()

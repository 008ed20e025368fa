"""Internal: the scheduler: a sans-IO core (`core.SchedulerCore`) and the ZeroMQ shell that feeds it (`shell`)."""

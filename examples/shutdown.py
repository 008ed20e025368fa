from scaler import Client

# needs a scheduler started without protection: scaler_scheduler --no-protected tcp://127.0.0.1:2345
client = Client(address="tcp://127.0.0.1:2345")
client.shutdown()  # stops the scheduler and its workers; ValueError on a protected scheduler
print("cluster stopped")  # cluster stopped

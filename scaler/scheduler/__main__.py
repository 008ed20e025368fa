from scaler.scheduler.cli import main

main()

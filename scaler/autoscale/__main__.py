from scaler.autoscale.cli import main

main()

from scaler.cluster.cli import main

main()

from scaler.monitor.ui.app import main

main()

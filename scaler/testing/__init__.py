"""Internal: fake peers and process helpers shared by the tests and the benchmarks.

One importable place, so that tests/ and bench/ need no `sys.path` edits to share them:

- `processes`: Scaler's CLIs as real processes (`ScalerProcess`), free addresses, waiting, stopping process groups,
  what this process maps at an address.
- `protocol_peer`: `ProtocolPeer`, a real ROUTER that plays scheduler and worker for a Client.
- `scheduler_harness`: `Harness`, the sans-IO scheduler core driven with real encoded messages.
- `sim_peers`: thousands of simulated workers and clients per process against a real scheduler (`PeerHost`).
- `many_workers`: a scheduler, several `scaler_cluster`s and client processes at once (`ManyWorkers`).

Nothing here is imported with the package; each module imports only what it uses (psutil for the process helpers,
the client for `many_workers`). The synthetic peers of the scheduler's JIT warm-up live beside it, in
`scaler.scheduler.synthetic_peers`: the scheduler runs them, and must not import this package, which imports it.
"""

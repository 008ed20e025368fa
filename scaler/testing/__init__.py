"""Internal: fake peers and process helpers shared by the tests, the benchmarks and the scheduler's JIT warm-up.

One importable place, so that tests/ and bench/ need no `sys.path` edits to share them:

- `processes`: Scaler's CLIs as real processes (`ScalerProcess`), free addresses, waiting, stopping process groups.
- `protocol_peer`: `ProtocolPeer`, a real ROUTER that plays scheduler and worker for a Client.
- `scheduler_harness`: `Harness`, the sans-IO scheduler core driven with real encoded messages.
- `sim_peers`: thousands of simulated workers and clients per process against a real scheduler (`PeerHost`).
- `synthetic_peers`: `SyntheticPeers`, one client and two workers, sans-IO; the scheduler's JIT warm-up runs them, so
  that module imports nothing but the protocol.
- `many_workers`: a scheduler, several `scaler_cluster`s and client processes at once (`ManyWorkers`).

Nothing here is imported with the package; each module imports only what it uses (psutil for the process helpers,
the client for `many_workers`).
"""

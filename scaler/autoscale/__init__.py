"""Internal: `scaler_autoscale`: keeps a pool of workers sized to the scheduler's demand, on this host, Slurm or
Kubernetes.

cli.py       the command line
runner.py    the loop, at the edge: status subscription, backend calls, log and timeline
demand.py    the one reader of the scheduler's status: SchedulerStatus -> Demand
policy.py    the decisions, sans IO: (now, Demand, jobs) -> Start / Retire
records.py   Demand, Job and the decisions
backends/    local (scaler_cluster processes), slurm (sbatch/scancel), kubernetes (deployments/scale)
"""

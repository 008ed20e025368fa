"""Internal: the data relay, a process beside the scheduler that passes held results and kept objects between peers
that cannot reach each other (a client behind NAT, workers on another network), so that those bytes never go through
the scheduler's own loop. See relay.py."""

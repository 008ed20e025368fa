"""Internal: the worker side: an agent process talks to the scheduler, a processor process runs user code."""

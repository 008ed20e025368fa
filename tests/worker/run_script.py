"""`python -m tests.worker.run_script SOURCE`: run SOURCE as a program, for tests that need a caller to kill."""

import sys

exec(compile(sys.argv[1], "<script>", "exec"))

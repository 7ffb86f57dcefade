"""`echo`, the test-only fourth kind: a job of N steps, each recorded in the store under the job's lease;
a step waits until its release file exists, so a test decides when it may finish. It proves that a kind
is two folders (this package's `service` and `workers`) and one registration line (the `kinds` setting):
leased, cancelled, killed and resumed, with its counters, events and one API route
(tests/test_fourth_kind.py)."""

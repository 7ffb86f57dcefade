"""The case kind: `kind` (the job), `run` (its run context, `CaseRun`) and `loop` (the rules of the case
loop)."""

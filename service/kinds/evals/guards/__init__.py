"""Guards that cost no run (issue 52): checks on a candidate's instructions made before its gate evaluates
it, each a field of the tuning file's `guards:` (docs/guards.md): `leak` (a case's words copied into the
instructions), `size` (instructions or an edit too large) and `collapse` (an edit that removes most of the
prose). A candidate a guard rejects is rejected as a gate rejects one (workers.kinds.evals.gate.apply)."""

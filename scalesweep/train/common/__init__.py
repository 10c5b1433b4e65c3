"""The harness every backend runs in, framework-neutral and standard library only (it imports
scalesweep.contract, never a backend nor the datasets): `harness.py` (a run's life cycle),
`stepclock.py`, `stepparts.py`, `runlog.py` (the records), `measure.py`, `energy.py`,
`heartbeat.py`, `faults.py`, `node.py`, `trainer_args.py` (the options every trainer shares)."""

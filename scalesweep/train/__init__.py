"""The trainers: the code that runs inside the training containers (Python 3.8 and 3.10 there;
docs/trainers.md, "Supported stacks"), beside the package's analysis layers and apart from them.

- `common/`: the framework-neutral harness every backend runs in (the run's life cycle, the step
  clocks and breakdown, the records, the measurement rules, energy, the heartbeat, injected
  faults, the node's facts, the shared options); standard library only.
- `datasets/`: the CIFAR pickle format and the synthetic datasets' makers (numpy, PIL).
- `tf_backend/`, `torch_backend/`: one backend per framework (its registry entry,
  scalesweep/contract/frameworks.py, names it); `python -m scalesweep.train.tf_backend` runs one.
- `attempt.py`: one attempt of a training job, the train rules' shell (standard library only).

It imports scalesweep.contract and itself only, and nothing else in the package imports it
(tests/test_architecture.py). The programs the workflow runs are the few lines of scripts/.
This file imports nothing.
"""

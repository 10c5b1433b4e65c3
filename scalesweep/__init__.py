"""scalesweep: plan scaling sweeps of deep-learning training, and turn their logs into tables,
figures and findings.

The package follows the data, one folder per stage, each importing only the ones before it
(docs/layout.md; tests/test_architecture.py keeps it so): contract (what the trainers share),
plan (what the workflow imports when it is parsed), logs, tidy, analysis, report, history, then
pipeline.py and cli.py at the top. Beside them, imported by none, the trainers (train/: they run
inside the training containers, import only the contract, and alone import TensorFlow or
PyTorch). This file imports nothing: the trainers import the package inside Python 3.8
containers.
"""

"""scalesweep: plan scaling sweeps of deep-learning training, and turn their logs into tables,
figures and findings.

The package follows the data, one folder per stage, each importing only the ones before it
(docs/layout.md; tests/test_architecture.py keeps it so): contract (what the trainers share),
plan (what the workflow imports when it is parsed), logs, tidy, analysis, report, history, then
pipeline.py and cli.py at the top. Nothing here imports TensorFlow or PyTorch, and this file
imports nothing: the trainers import the contract inside Python 3.8 containers.
"""

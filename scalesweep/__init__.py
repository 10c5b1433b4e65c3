"""scalesweep: parse training logs of scaling sweeps and turn them into scaling tables and figures.

Pure functions only: no TensorFlow or PyTorch import, so Snakemake's DAG build and the analysis
stay fast and run in any environment.
"""

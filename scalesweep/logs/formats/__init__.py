"""One module per log format, each parsing numbered lines into logs/run.py's ParsedRun: our
`:::SCALESWEEP` records, the reference TensorFlow script's Keras lines, the reference DDP
script's lines (logs/read.py detects which)."""

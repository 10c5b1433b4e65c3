"""runs.csv -> the analysis tables: scaling (speedup, efficiency), the step breakdown, the
Amdahl/Gustafson fits, the sweet spot, and the maximum batch. Imports the layers before it (contract,
plan, logs, tidy)."""

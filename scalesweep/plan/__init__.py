"""What the workflow imports when it is parsed: the config read strictly and checked, the run
matrix, the trainers' commands and SLURM resources, container images, the preview, the analysis
settings, the code version and the history folder's place; in `cluster/`, what the head needs on a
cluster (the site's demands, an earlier head's lock and jobs). No matplotlib, scipy, DuckDB,
TensorFlow or PyTorch (every Snakemake start, cluster jobs included, parses the workflow); imports
only the contract."""

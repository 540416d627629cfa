"""Slurm: each stage as a job array (datatrove's ``SlurmPipelineExecutor``), checked before submission."""

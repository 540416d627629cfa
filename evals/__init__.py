"""Evaluation: tasks as functions of a model's log-probabilities (`evals.tasks`), the scorer that
turns a forward pass into those log-probabilities (`evals.scoring`), and the drivers above them
(`evals.models`, `evals.run`)."""

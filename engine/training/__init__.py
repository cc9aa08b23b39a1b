"""Training: the data sets, the training loop and its losses, the schedules at which metrics are recorded."""

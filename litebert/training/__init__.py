"""The one training loop and what it owns.

    loop          train(): the cadence (step, maybe log, maybe save, maybe evaluate) and train_step
    train_config  TrainConfig, the options of one run, with their declared ranges
    data          what the loop trains on: ShuffledData(num_examples, collate) or a batch_fn
    state         what a checkpoint holds, as named objects with state_dict/load_state_dict
    checkpoint    the checkpoint directory on disk (atomic writes, the COMPLETE marker, train_state.pt)
    distributed   rank, world size and device, from one place; the process group
    metrics_log   metrics.jsonl and its plot
    optim         LAMB, the parameter groups, the learning-rate schedule, gradient clipping
    prerelease    reading litebert's own files from before the release, gathered to be dropped after 2027-06-01
    sweep         grids of runs (seeds x swept values): resumable, compared by settings, summarised over seeds
"""

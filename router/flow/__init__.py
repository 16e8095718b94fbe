"""Flow records (docs/flow-records.md): what the router emits for analytics.

Sans-IO: `hist` (the log2 duration histograms), `records` (making records, the bounded buffer,
the batches), `recorder` (reading the routing core's snapshots into records). The file writer
and the task that sends the batches are router.net.flowtask.
"""

"""What runs inside a worker actor: the actor that holds function shards and runs
function passes, its call records, the wire format, and a cluster's kernel store.

Starting workers and reaching them is ``scheduler.pool``'s business."""

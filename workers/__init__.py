"""Ray actor workers that hold function shards and run function passes."""

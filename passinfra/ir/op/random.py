"""random op builders (owned by the ops helper; stub)."""

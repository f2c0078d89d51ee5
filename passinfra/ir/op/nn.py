"""nn op builders (owned by the ops helper; stub)."""

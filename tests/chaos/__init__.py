"""The chaos run: several runjobs processes killed, paused, partitioned and cut off from a
restarting database while a history of every fenced write is recorded and then checked."""

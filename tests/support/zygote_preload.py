"""The preload of `tests.support.zygote_probe`'s fork server: module state a run changes."""

print("preload output")

#: the pids of the runs that appended to it (a run forked later must see none of them)
RUNS: list[int] = []

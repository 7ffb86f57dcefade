"""`tunefleet watch`: a live terminal view of the fleet.

snapshot   Redis -> WatchSnapshot (status, the steps under way, locks, the latest events)
logtail    the store -> the tail of one step's agent log
state      keys -> which row is selected, overview or follow (pure)
view       snapshot + state + size -> rich renderables (pure)
terminal   cbreak mode on the TTY, restored on exit, and the bytes -> keys decoder
app        the loop: refresh, keys, redraw
"""

"""Start, watch, restart and stop the policy processes (:mod:`.pool`, :mod:`.runner`); with several machines,
their sessions and the watch on the policies elsewhere (:mod:`.nodes`)."""

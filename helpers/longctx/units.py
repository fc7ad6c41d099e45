"""Units and the memory vocabulary every profile, estimate and plot shares."""

GIB = 2**30  # every byte count in longctx is shown in binary units: GiB and MiB
MIB = 2**20
# The categories every profile reports, in stacking order (bottom first).
CATEGORIES = ("parameters", "buffers", "gradients", "optimizer", "activations", "temporaries", "other")
PHASES = ("forward", "backward", "optimizer")

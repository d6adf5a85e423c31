"""Flow-matching velocity estimators, one file each (v1's U-Net `ConditionalDecoder` in `unet.py`); the
registry says which one a family's flow uses, and the CFM sampler takes it as an argument."""

"""What several methods share: networks, training loops, generic detectors, augmentations.

No method folder imports another: a method takes what it shares with others from here
(:mod:`fedad.components.nn` the torch modules, :mod:`fedad.components.train` the training
loop); the generic detectors live in :mod:`fedad.components.detectors`.
"""

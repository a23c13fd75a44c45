"""The generic detectors several methods share (each module registers its own by name).

:mod:`.neural` the autoencoder and Deep SVDD (and :class:`~.neural.TorchDetector`, the base of
every torch detector), :mod:`.contrastive` CSI-style shifted-instance contrast, :mod:`.ocsvm`
the RBF one-class SVM, :mod:`.patchcore` frozen patch features with a coreset bank,
:mod:`.pretrained` frozen pretrained features with k-NN or a Gaussian.
"""

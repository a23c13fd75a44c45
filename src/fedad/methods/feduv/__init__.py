"""FedUV (federated user verification with secret codes), reduced to its core idea.

Paper label ``FedUV``: Hosseini, Park, Yun, Louizos, Soriaga, Welling, *Federated Learning of
User Verification Models Without Sharing Embeddings* (ICML 2021, arXiv:2104.08776). A
baseline of ProtoFL (its reference [17]). Each client holds one user's data (one class) and a
secret code; the shared network is trained so that each client's outputs correlate with its
own code, with a positive loss only, so no client or server needs anyone's embeddings or
code. The paper's text is not in the repository: the reduction below follows its
abstract and the summary in ProtoFL's related work, and ``docs/methods/feduv.md`` says
what is kept and what is not. Paper parts and what implements each (module paths relative
to ``fedad.methods.feduv``):

====================  ==============================================================================
paper                 what, and where it is implemented
====================  ==============================================================================
secret codeword v_u   one ±1 vector of length L per client, drawn and kept on the client:
                      ``model.secret_code``, ``federated.client_code``,
                      ``federated.FedUV.own_code`` (reduced: random codes, not the codewords
                      of an error-correcting code)
model f(x) = W g(x)   ``model.FedUVNet`` (encoder g, linear head W whose columns are the vectors
                      the users learn jointly)
correlation with v_u  ``model.correlation`` (cosine of f(x) and the code)
positive-only loss    ``model.feduv_loss``: mean max(0, m - rho);
                      ``detector.FedUVDetector.loss``
federated training    FedAvg of the whole network, the code never sent:
                      ``federated.FedUV.server``, ``federated.FedUV.client_train``
verification          score -rho(x) (``model.feduv_score``, ``detector.FedUVDetector.score``),
                      threshold from the client's own training scores (the platform's
                      quantile; the paper's warm-up phase for a target true-positive rate is
                      not built)
====================  ==============================================================================
"""

from fedad.core.catalog import declare_detector, declare_method

declare_method(
    "feduv",
    "fedad.methods.feduv.federated",
    "FedUV: each client fits the shared model to its own secret code (FedAvg)",
    ("vector", "image"),
)
declare_detector("feduv", "fedad.methods.feduv.detector", exporter="fedad.methods.feduv.export")

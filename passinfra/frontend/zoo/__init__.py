"""The model zoo: every built-in model builder, reachable from this one module.

Two kinds of builder, each model defined once:

- ``onnx_models``: ``mlp``, ``resnet``, ``transformer`` build an ``onnx.ModelProto``
  (through the ONNX importer, as a user's model would go); these are what ``zoo:``
  specs name (:data:`MODELS`, :func:`zoo_spec`) and are re-exported here by name.
- ``ir_models``: ``demo_cnn``, ``mlp``, ``transformer_block`` (and their ``*_weights``)
  build an IRModule straight from the op builders, with Python-valued parameters (the
  IR ``mlp`` takes a sequence of hidden widths); :data:`IR_MODELS` holds them by name.
  They stay distinct from the ONNX ``mlp`` / ``transformer`` because tests and
  benchmarks compare them against NumPy forward passes of their own weights.

``params`` holds the parameter tables of every builder and the check they share.
"""

from passinfra.frontend.zoo import ir_models, onnx_models
from passinfra.frontend.zoo.ir_models import MODELS as IR_MODELS
from passinfra.frontend.zoo.onnx_models import MAX_WEIGHT_BYTES, MODELS, OPSET, mlp, resnet, save, transformer
from passinfra.frontend.zoo.params import ZooSpecError
from passinfra.frontend.zoo.spec import zoo_spec

__all__ = [
    "IR_MODELS", "MAX_WEIGHT_BYTES", "MODELS", "OPSET", "ZooSpecError", "ir_models", "mlp", "onnx_models",
    "resnet", "save", "transformer", "zoo_spec",
]

"""A problem is data + model + objective + metrics, in plain torch, replicated over seeds.

Interface used by lit.replica.ReplicaModule:
  accumulate(backward) -> (R,) training loss; calls backward(loss.sum()) (maybe per chunk)
  evaluate() -> {name: (R,) tensor}, the metrics logged along training and at the end
  arrays() -> {name: tensor}, optional per-replica arrays saved in the record
"""

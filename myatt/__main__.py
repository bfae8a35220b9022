"""python -m myatt: the tutorial's own example, run by myatt.

The same sizes as the seed's __main__: Q and K [1, 1, 32], V [1, 32, 64], and a
MyAtt(32, 32, 32, 64, 32).  Prints the shapes and values of both results, as the
seed does; where torch is importable, also runs the torch original with the same
weights and inputs and prints the largest difference.
"""
import numpy as np

import myatt


def main():
    query_size, key_size = 32, 32
    value_size1 = 32   # 32 words
    value_size2 = 64   # 64 features
    output_size = 32
    batch_size, seq_len, feature_dim = 1, 1, 32

    rng = np.random.default_rng(0)
    Q = rng.standard_normal((batch_size, seq_len, feature_dim), dtype=np.float32)
    K = rng.standard_normal((batch_size, seq_len, feature_dim), dtype=np.float32)
    V = rng.standard_normal((batch_size, seq_len * value_size1, feature_dim * 2), dtype=np.float32)

    myatt.manual_seed(0)
    m = myatt.MyAtt(query_size, key_size, value_size1, value_size2, output_size)
    output, attn_weights = m(Q, K, V)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    print(m)
    print("output->", output.shape, output)
    print("attn_weights->", attn_weights.shape, attn_weights)

    try:
        import torch
    except ImportError:
        print("(torch is not installed: no comparison with the original)")
        return

    class TorchMyAtt(torch.nn.Module):   # the seed's module, as it is written there
        def __init__(self, query_size, key_size, value_size1, value_size2, output_size):
            super().__init__()
            self.attn = torch.nn.Linear(query_size + key_size, value_size1)
            self.attn_combine = torch.nn.Linear(query_size + value_size2, output_size)

        def forward(self, Q, K, V):
            F = torch.nn.functional
            attn_weights = F.softmax(self.attn(torch.cat((Q[0], K[0]), dim=-1)), dim=-1)
            attn_applied = torch.bmm(attn_weights.unsqueeze(0), V)
            output = torch.cat((Q[0], attn_applied[0]), dim=-1)
            output = self.attn_combine(output).unsqueeze(0)
            return output, attn_weights

    torch.manual_seed(0)
    ref = TorchMyAtt(query_size, key_size, value_size1, value_size2, output_size)
    same_init = all(np.array_equal(v.numpy(), m.state_dict()[k])
                    for k, v in ref.state_dict().items())
    with torch.no_grad():
        t_out, t_w = ref(torch.from_numpy(Q), torch.from_numpy(K), torch.from_numpy(V))
    print("torch MyAtt, same seed: initial weights identical:", same_init)
    print("largest difference: output %.3g, attn_weights %.3g" % (
        np.abs(output - t_out.numpy()).max(), np.abs(attn_weights - t_w.numpy()).max()))


if __name__ == "__main__":
    main()

"""The torch modules: configs, attention, the GRU and Transformer seq2seq models, head ablation and the capture of
intermediate tensors."""

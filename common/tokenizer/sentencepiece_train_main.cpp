// splitspec-spm-train: runs SentencePieceTrainer::Train on its arguments
// ("--input=... --model_prefix=..."). A separate process so that the trainer
// never shares a symbol namespace with LibTorch; see sentencepiece_backend.h.
#include <sentencepiece_trainer.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  std::string flags;
  for (int i = 1; i < argc; ++i) flags += (i > 1 ? " " : "") + std::string(argv[i]);
  const auto status = sentencepiece::SentencePieceTrainer::Train(flags);
  if (!status.ok()) {
    std::cerr << status.ToString() << "\n";
    return 1;
  }
  return 0;
}

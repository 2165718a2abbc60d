// Slow reference for the WordPiece learner: a line-by-line transcription of TF Text's
// wordpiece_tokenizer_learner_lib.py (per-length substring dicts, prefix decrements), used to
// check the fast learner in src/text, which relies on an algebraic shortcut.
#pragma once

#include "text/wordpiece_learner.h"

#include <string>
#include <vector>

namespace fp8kit::text::reference {

std::vector<std::string> learn(const WordCounts& word_counts, const WordPieceLearnerOptions& options);

}  // namespace fp8kit::text::reference

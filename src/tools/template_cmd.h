// `duet template`: renders a model's chat template for a conversation and prints the prompt,
// exactly as transformers' apply_chat_template(tokenize=False) would. For checking templates
// and for scripts; the server uses tokenizer/chat_template.h directly.
#pragma once

namespace duet {

int run_template(int argc, char** argv);

}  // namespace duet

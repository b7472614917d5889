// The ops' checks that need neither the tensors' data nor the device, for the fake
// implementations (torch_ops.meta): a meta or FakeTensorMode call then raises the ValueError, with
// its message, that the eager call raises (registration.cpp binds it as _C.check_attention_inputs).
#pragma once

#include "decode_args.h"

namespace cake {

// `args` packed as the op packs them (pack_attention_inputs, then for the decode its scratch,
// max_splits, head_tiles and num_splits as given; the prefill reads head_tiles only). Runs the
// op's tensor checks without the data-pointer alignment, then the plan's device-free checks:
// head_tiles among H's choices; for the decode an explicit num_splits and the scratch against it,
// or, without num_splits, the scratch against every split count a plan may have
// (decode_split_range). Whether the GPU's shared memory holds a head tile is the op's to say.
void check_call_without_data(bool decode, DecodeArgs& args);

}  // namespace cake

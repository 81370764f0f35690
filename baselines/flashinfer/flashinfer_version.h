// The FlashInfer release the peers are built from: baselines/flashinfer/VERSION, compiled into
// topt_flashinfer as TOPT_FLASHINFER_VERSION.
#pragma once

namespace topt::baselines::flashinfer {

const char* version();  // "0.5.3"

}  // namespace topt::baselines::flashinfer

// The launch log that compares two runs bit for bit (BOOSTLM_CUDA_EMULATOR_RECORD=path): after
// each kernel, one line with the launch's number, kernel, site and geometry, and a 64-bit hash of
// every byte of each device allocation its arguments point into (the memory it can write: its
// pointer arguments and the words of its struct and lambda arguments). Two
// runs of the same program in two thread orders must write identical logs; a line that differs
// names the first kernel whose output depends on the order (a race) or on memory no thread wrote
// (poison read under one order and a written value under another). scripts: compare_records.py.
#pragma once

#include "cuda_emulator/launch.h"

namespace cuda_emulator {

// Appends the launch's line when recording is on (device memory is open: called after the run).
void record_launch(const KernelLaunch& launch);

}  // namespace cuda_emulator

// Reading and writing Programs: pipetwin's text form (one rank per line, with
// a header), torch.distributed.pipelining's CSV (one row per rank, compute-only
// or with communication) and JSON. Readers name the file and line or field of
// any error; writers go through a temporary file and a rename.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schedule/program.hpp"

namespace pipetwin::schedule {

// PytorchCsv: the CSV that torch.distributed.pipelining's _load_csv reads
// (compute-only or with communication): what PyTorch has no action for is
// left out (STEP: the optimizer runs after the schedule; R: recompute is
// activation checkpointing inside a stage's forward).
enum class Format { Text, Csv, Json, PytorchCsv };
Format parse_format(std::string_view name);  // "text", "csv", "json", "pytorch-csv"
const std::vector<std::string>& format_names();

std::string to_text(const Program& program);
std::string to_csv(const Program& program);
// `left_out`, when given, gets one line per kind of action left out ("2 STEP (...)").
std::string to_pytorch_csv(const Program& program, std::vector<std::string>* left_out = nullptr);
std::string to_json(const Program& program, int indent = 1);

Program parse_text(std::string_view text, const std::string& source);
// PyTorch's CSV as its runtime reads it: empty cells are bubbles; UNSHARD and
// RESHARD (FSDP) are kept; (a;b)OVERLAP_F_B becomes its sub-actions in
// order; receives of a file with communication are waited for where their
// data is used (receive_at_use). `notes`, when given, gets a line for each of
// these the file held.
Program parse_csv(std::string_view text, const std::string& source, std::vector<std::string>* notes = nullptr);
Program parse_json(std::string_view text, const std::string& source);

std::string format_program(const Program& program, Format format);
// Reads a file in any of the three formats (JSON if it starts with '{', text
// if it holds a "rank N:" line, CSV otherwise).
Program read_program(const std::string& path, std::vector<std::string>* notes = nullptr);
// `text` in any of the three forms, told apart as read_program does: JSON if
// it starts with '{', pipetwin's text if a line starts with "rank ", a
// PyTorch CSV otherwise; `source` names it in errors.
Program parse_program(std::string_view text, const std::string& source, std::vector<std::string>* notes = nullptr);

std::string read_file(const std::string& path);
// Throws "<source>:<line>: not UTF-8 text (byte \xNN at column C)" at the first
// byte that is not part of valid UTF-8: what is read from a file may end up in
// JSON (traces, --json), which holds UTF-8 only.
void check_utf8(std::string_view text, const std::string& source);

// The length of the valid UTF-8 sequence that starts at text[i] (1 for
// ASCII), or 0 when the bytes there are not one: not a lead byte, too few
// continuation bytes, an overlong form, a surrogate or past U+10FFFF.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i);
// Writes `content` to `path` through `path.tmp.<pid>` and rename(2), so that
// no reader ever sees half a file. A symbolic link is followed (its target is
// replaced); a device, FIFO or socket (/dev/null) is written in place; a
// folder is refused naming the path.
void write_file_atomic(const std::string& path, std::string_view content);

}  // namespace pipetwin::schedule

// What both executables' main() share: the commands registered on one CLI11
// app, one parse, and errors turned into one line on stderr and an exit code:
//   1  bad input (pipetwin::Error: a file, field, rank or step is named)
//   2  bad command line (CLI11)
//   3  internal error (a bug: please report it)
#pragma once

#include <vector>

#include "cli/commands.hpp"

namespace pipetwin::cli {

using AddCommand = Run (*)(CLI::App&);

// Parses argv against `commands` (one required) and runs the chosen one.
int run_app(int argc, char** argv, const std::string& description, const std::vector<AddCommand>& commands,
            const std::vector<std::pair<std::string, std::string>>& elsewhere = {});

// `s` with bytes that are not valid UTF-8, and control characters other than
// newlines and tabs, written as \xNN (a message may quote its input).
std::string printable(const std::string& s);

// What reading `source` said (schedule::read_program's notes): one
// "note: SOURCE: NOTE" line each on stderr.
void print_notes(const std::string& source, const std::vector<std::string>& notes);

}  // namespace pipetwin::cli

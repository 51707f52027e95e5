#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"boostlm: training low-rank LLaMA models (BOOST, arXiv 2512.12131)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "boostlm 0.1");
  boostlm::cli::add_prepare(app);
  boostlm::cli::add_train(app);
  boostlm::cli::add_eval(app);
  boostlm::cli::add_init(app);
  boostlm::cli::add_generate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const boostlm::Error& e) {
    const std::string name =
        app.get_subcommands().empty() ? "" : " " + app.get_subcommands()[0]->get_name();
    std::fprintf(stderr, "boostlm%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
  return boostlm::cli::exit_code();
}

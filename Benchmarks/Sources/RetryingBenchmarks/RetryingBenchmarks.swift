import Foundation

/// `retrying-benchmarks`: runs the suite, prints the results table, and writes the results
/// as JSON on request. See `Options.usage`.
@main
enum RetryingBenchmarks {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == RestoreBenchmark.childCommand {
            RestoreBenchmark.runChild(Array(arguments.dropFirst()))
        }
        let options: Options
        do {
            options = try Options(arguments: arguments)
        } catch {
            printError("error: \(error)\n\n\(Options.usage)")
            exit(64)
        }
        if options.showsHelp {
            print(Options.usage)
            return
        }
        if options.listsBenchmarks {
            for benchmark in BenchmarkRegistry.all {
                print("\(benchmark.id)  \(benchmark.title)")
            }
            return
        }

        // Ids match in any case (`--only p3b`); options hold them uppercased.
        let knownIds = Set(BenchmarkRegistry.all.map { $0.id.uppercased() })
        if let unknown = options.only?.subtracting(knownIds), !unknown.isEmpty {
            printError("error: no benchmark \(unknown.sorted().joined(separator: ", ")); known: \(knownIds.sorted().joined(separator: ", "))")
            exit(64)
        }
        let selected = BenchmarkRegistry.all.filter { options.only?.contains($0.id.uppercased()) ?? true }

        #if DEBUG
        let configuration = "debug"
        printError("warning: this is a debug build; its figures mean nothing. Build with -c release.")
        #else
        let configuration = "release"
        #endif

        let context = BenchmarkContext(mode: options.mode)
        let date = ISO8601DateFormatter().string(from: Date())
        var results: [BenchmarkResult] = []
        for benchmark in selected {
            printError("\(benchmark.id): \(benchmark.title)")
            let start = Timing.now()
            do {
                results += try benchmark.run(in: context)
            } catch {
                printError("error: \(benchmark.id) failed: \(error)")
                exit(1)
            }
            context.progress(String(format: "done in %.1f s", Timing.seconds(from: start, to: Timing.now())))
        }

        let processInfo = ProcessInfo.processInfo
        print("")
        print("RetryingOperation benchmarks — \(options.mode.rawValue) run, \(configuration) build, \(processInfo.activeProcessorCount) cores, \(date)")
        print("")
        print(ResultTable.render(results))

        if let path = options.jsonPath {
            let file = ResultsFile(
                mode: options.mode,
                configuration: configuration,
                date: date,
                processorCount: processInfo.activeProcessorCount,
                operatingSystem: processInfo.operatingSystemVersionString,
                results: results
            )
            do {
                try file.write(to: path)
            } catch {
                printError("error: cannot write \(path): \(error)")
                exit(1)
            }
        }
    }

    private static func printError(_ message: String) {
        FileHandle.standardError.write(Data("\(message)\n".utf8))
    }
}

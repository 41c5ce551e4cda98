import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// store-inspector: list, show, export, failed, stats, retry-failed, purge and cancel over a
// PersistentOperations store directory. See `InspectorCommand.usage`.

do {
    let command = try InspectorCommand(arguments: Array(CommandLine.arguments.dropFirst()))
    let inspector = StoreInspector(store: command.store, json: command.json, wait: command.wait) { line in
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
    try inspector.run(command.action)
} catch let error as InspectorError {
    let stream = error.exitStatus == 0 ? FileHandle.standardOutput : FileHandle.standardError
    stream.write(Data(((error.exitStatus == 0 ? "" : "store-inspector: ") + error.description + "\n").utf8))
    exit(error.exitStatus)
} catch {
    FileHandle.standardError.write(Data("store-inspector: \(error)\n".utf8))
    exit(1)
}

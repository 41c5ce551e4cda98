import Foundation

/// Where one demo run keeps its store, the app's effects journal and the app's error output.
///
/// By default everything lives in a new temporary directory that is deleted at the end; with
/// `--store DIR` the store is `DIR` (which must be empty or absent) and the journal is
/// `DIR/effects.txt`, both kept for inspection.
struct Workspace {
    /// The store directory the app opens.
    let store: URL
    /// The effects journal the app appends to.
    let journal: String
    /// The file the app's error output goes to.
    let appErrorPath: String
    /// The temporary directory to delete at the end, if any.
    private let temporaryDirectory: URL?

    /// Creates the directories.
    ///
    /// - Throws: ``DemoError`` when `keptStore` exists and is not an empty directory.
    init(keeping keptStore: URL?) throws {
        let fileManager = FileManager.default
        let directory: URL
        if let keptStore {
            var isDirectory: ObjCBool = false
            if fileManager.fileExists(atPath: keptStore.path, isDirectory: &isDirectory) {
                guard isDirectory.boolValue, try fileManager.contentsOfDirectory(atPath: keptStore.path).isEmpty else {
                    throw DemoError("--store \(keptStore.path) must be an empty directory or not exist yet, so the tally covers this run only")
                }
            }
            try fileManager.createDirectory(at: keptStore, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            directory = keptStore
            store = keptStore
            temporaryDirectory = nil
        } else {
            directory = fileManager.temporaryDirectory.appendingPathComponent("crash-demo-\(UUID().uuidString)", isDirectory: true)
            try fileManager.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            store = directory.appendingPathComponent("store", isDirectory: true)
            temporaryDirectory = directory
        }
        journal = directory.appendingPathComponent("effects.txt").path
        appErrorPath = temporaryDirectory?.appendingPathComponent("app-errors.txt").path
            ?? fileManager.temporaryDirectory.appendingPathComponent("crash-demo-app-errors-\(UUID().uuidString).txt").path
        guard fileManager.createFile(atPath: appErrorPath, contents: nil) else {
            throw DemoError("cannot create \(appErrorPath)")
        }
    }

    /// A handle that appends to the app's error file, for one launch.
    func appErrorHandle() throws -> FileHandle {
        guard let handle = FileHandle(forWritingAtPath: appErrorPath) else { throw DemoError("cannot open \(appErrorPath)") }
        handle.seekToEndOfFile()
        return handle
    }

    /// What the app wrote to its error output so far.
    var appErrors: String {
        (try? String(contentsOfFile: appErrorPath, encoding: .utf8)) ?? ""
    }

    /// Deletes the temporary directory (or, with a kept store, the error file).
    func removeIfTemporary() {
        if let temporaryDirectory {
            try? FileManager.default.removeItem(at: temporaryDirectory)
        } else {
            try? FileManager.default.removeItem(atPath: appErrorPath)
        }
    }
}

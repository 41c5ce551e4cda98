import Foundation

/// Makes directory changes durable, sharing one directory sync among concurrent callers
/// (group commit, see ``GroupCommit``).
///
/// Each caller first makes its own change (a rename or unlink) and then calls
/// ``synchronize()``, which returns once a directory sync that *started after* the change has
/// succeeded.
///
/// Thread safety: any thread may call ``synchronize()``.
package final class DirectorySynchronizer: Sendable {
    private let group = GroupCommit()
    private let path: String
    private let fileSystem: FileSystem

    /// Creates a synchroniser for the directory at `path`.
    package init(path: String, fileSystem: FileSystem) {
        self.path = path
        self.fileSystem = fileSystem
    }

    /// Returns once a sync of the directory that started after this call began has succeeded.
    ///
    /// - Throws: the error of the sync that covered this call, when it failed. The next call
    ///   tries again.
    package func synchronize() throws {
        try group.join { _ in try fileSystem.synchronizeDirectory(path) }
    }
}

import CrashHarness
import Foundation
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An in-memory file system that knows what a power cut would leave, after SQLite's crash-test
/// VFS (`src/test6.c`), extended to directories.
///
/// Every file keeps its durable contents apart from the writes made since its last
/// ``FileSystem/synchronize``, and every directory its durable entries apart from the changes
/// (creations, renames, links, removals) made since its last
/// ``FileSystem/synchronizeDirectory``. The live state, which every call sees, is the durable
/// state with all of those applied. ``cut(seed:)`` returns what a power cut at this instant
/// could leave: the durable state plus a random subset of the pending changes, each decided
/// on its own, so that directories lose their changes independently of each other and of the
/// files' data:
/// - each pending write is lost, kept whole, kept as a prefix, or torn (kept with a run of
///   garbage or zeros in its range); a pending truncation is kept or lost;
/// - each pending directory change is kept or lost (a kept creation or rename keeps the
///   name, not the file's unflushed data); the kept ones apply in the order they were made.
///
/// One rule follows journaling file systems (ext4, XFS, btrfs, APFS) rather than pure chance: a
/// rename between two directories is one change, kept or lost whole, so a rename never loses
/// its file; and syncing a directory makes durable, in order, every change of that directory
/// and, for a change shared with another directory (such a rename), the changes of the other
/// directory made before it.
///
/// ```swift
/// let disk = PowerLossFileSystem()
/// let store = try RecordStore(directory: URL(fileURLWithPath: "/data/store"),
///                             configuration: .init(fileSystem: disk.fileSystem))
/// try store.add(record)
/// let afterPowerCut = disk.cut(seed: 7)   // a new file system: what survived
/// ```
///
/// ``armCut(beforeCall:seed:)`` takes a cut in the middle of a workload: just before the given
/// call (counting every call through the file system) runs; ``cuts`` collects them.
///
/// Descriptors are numbers from 2^30 up, so that a call that bypasses the seam with one (the
/// store lock's `ftruncate`) fails with `EBADF` instead of touching a real file. `syncfs`
/// (``FileSystem/synchronizeFileSystem`` is `nil`), symbolic links and `..` in paths are not
/// modelled; `flock` is an in-process lock per file, exclusive in every mode.
///
/// Thread safety: every call may come from any thread; the state is behind one lock.
final class PowerLossFileSystem: Sendable {
    private let model: Locked<Model>

    /// An empty file system holding only `/`, durable.
    ///
    /// - Parameter splitsRenamesBetweenDirectories: when `true`, a rename between directories
    ///   is two changes, an arrival in the destination and a removal from the source, each
    ///   kept or lost on its own and made durable by its own directory's sync: weaker than
    ///   journaling file systems, for exploring what a store would do there. Default: `false`.
    init(splitsRenamesBetweenDirectories: Bool = false) {
        var model = Model()
        model.splitsRenames = splitsRenamesBetweenDirectories
        self.model = Locked(model)
    }

    private init(model: Model) {
        self.model = Locked(model)
    }

    /// The number of calls made through ``fileSystem`` so far.
    var callCount: Int {
        model.withLock { $0.callCount }
    }

    /// The cuts taken by ``armCut(beforeCall:seed:)``, with the call number each came before.
    var cuts: [(call: Int, fileSystem: PowerLossFileSystem)] {
        model.withLock { $0.takenCuts }.map { ($0.call, PowerLossFileSystem(model: $0.model)) }
    }

    /// Arranges for a cut with `seed` to be taken just before call number `call` (counting
    /// from 1) runs.
    func armCut(beforeCall call: Int, seed: UInt64) {
        model.withLock { $0.armedCuts[call, default: []].append(seed) }
    }

    /// What a power cut now could leave, chosen with `seed`: a new file system whose state is
    /// all durable, with no open descriptors or locks.
    func cut(seed: UInt64) -> PowerLossFileSystem {
        PowerLossFileSystem(model: model.withLock { $0.cut(seed: seed) })
    }

    /// Every path with its contents (`nil` for a directory), as the live state has them.
    func snapshot() -> [String: [UInt8]?] {
        model.withLock { $0.snapshot() }
    }

    /// The pending (unsynced) changes: writes and truncations of files, and directory changes.
    var pendingChangeCount: (data: Int, entries: Int) {
        model.withLock { model in
            (model.nodes.values.reduce(0) { $0 + $1.pendingData.count }, model.changes.count)
        }
    }

    /// The calls, as a ``FileSystem`` for a store.
    var fileSystem: FileSystem {
        FileSystem(
            open: { path, flags, mode in try self.call { try $0.open(path, flags: flags, mode: mode) } },
            close: { descriptor in try self.call { try $0.close(descriptor) } },
            read: { descriptor, buffer in try self.call { try $0.read(descriptor, into: buffer) } },
            readAt: { descriptor, buffer, offset in try self.call { try $0.read(descriptor, into: buffer, at: Int(offset)) } },
            write: { descriptor, bytes in try self.call { try $0.write(descriptor, bytes: [UInt8](bytes)) } },
            writeAt: { descriptor, bytes, offset in try self.call { try $0.write(descriptor, bytes: [UInt8](bytes), at: Int(offset)) } },
            truncate: { descriptor, length in try self.call { try $0.truncate(descriptor, to: Int(length)) } },
            synchronize: { descriptor in try self.call { try $0.synchronize(descriptor) } },
            synchronizeData: { descriptor in try self.call { try $0.synchronize(descriptor) } },
            synchronizeFileSystem: nil,
            synchronizeDirectory: { path in try self.call { try $0.synchronizeDirectory(path) } },
            setPermissions: { descriptor, mode in
                try self.call { model in
                    guard let open = model.descriptors[descriptor] else { throw SystemCallError("fchmod", code: EBADF) }
                    model.nodes[open.node]!.permissions = mode & 0o777
                }
            },
            setPathPermissions: { path, mode in
                try self.call { model in
                    guard let id = model.lookup(path) else { throw SystemCallError("chmod", path: path, code: ENOENT) }
                    model.nodes[id]!.permissions = mode & 0o777
                }
            },
            status: { descriptor in try self.call { try $0.status(of: $0.node(of: descriptor, call: "fstat")) } },
            linkStatus: { path in try self.call { try $0.status(of: $0.node(at: path, call: "lstat")) } },
            rename: { source, destination in try self.call { try $0.rename(source, to: destination) } },
            link: { existing, newName in try self.call { try $0.link(existing, as: newName) } },
            unlink: { path in try self.call { try $0.unlink(path) } },
            makeDirectory: { path, mode in try self.call { try $0.makeDirectory(path, mode: mode) } },
            contentsOfDirectory: { path in
                try self.call { model in
                    let node = try model.node(at: path, call: "opendir")
                    guard node.kind == .directory else { throw SystemCallError("opendir", path: path, code: ENOTDIR) }
                    return node.entries.keys.sorted()
                }
            },
            lock: { descriptor, operation in try self.call { try $0.lock(descriptor, operation: operation) } }
        )
    }

    /// Counts the call, takes the cuts armed for it, then runs it.
    private func call<Result>(_ body: (inout Model) throws -> Result) throws -> Result {
        try model.withLock { model in
            model.callCount += 1
            for seed in model.armedCuts.removeValue(forKey: model.callCount) ?? [] {
                model.takenCuts.append((model.callCount, model.cut(seed: seed)))
            }
            return try body(&model)
        }
    }
}

// MARK: - The model

extension PowerLossFileSystem {
    struct Node {
        enum Kind { case file, directory }

        var kind: Kind
        var permissions: mode_t
        /// A file's contents as every call sees them.
        var data: [UInt8] = []
        /// A file's contents as of its last sync.
        var durableData: [UInt8] = []
        /// A file's writes and truncations since its last sync, in order.
        var pendingData: [DataChange] = []
        /// A directory's entries as every call sees them.
        var entries: [String: Int] = [:]
        /// A directory's entries as of its last sync.
        var durableEntries: [String: Int] = [:]
        /// The directory changes touching this directory since its last sync, in order.
        var pendingEntries: [Int] = []
    }

    enum DataChange {
        case write(offset: Int, bytes: [UInt8])
        case truncate(length: Int)
    }

    /// One change of directory entries: for each directory it touches, the names it sets
    /// (to a node) or removes (`nil`), in order.
    struct EntryChange {
        var effects: [Int: [(name: String, node: Int?)]]
    }

    struct Descriptor {
        var node: Int
        var isReadable: Bool
        var isWritable: Bool
        var appends: Bool
        var offset = 0
    }

    struct Model {
        static let root = 0

        var nodes: [Int: Node] = [root: Node(kind: .directory, permissions: 0o755)]
        /// Pending directory changes by number; numbers grow in the order changes are made.
        var changes: [Int: EntryChange] = [:]
        var nextNode = 1
        var nextChange = 0
        var descriptors: [Int32: Descriptor] = [:]
        var nextDescriptor: Int32 = 1 << 30
        /// The descriptor holding each locked node.
        var locks: [Int: Int32] = [:]
        var callCount = 0
        var armedCuts: [Int: [UInt64]] = [:]
        var takenCuts: [(call: Int, model: Model)] = []
        /// See ``PowerLossFileSystem/init(splitsRenamesBetweenDirectories:)``.
        var splitsRenames = false

        // MARK: Paths

        func lookup(_ path: String) -> Int? {
            var current = Self.root
            for component in path.split(separator: "/") where component != "." {
                guard nodes[current]!.kind == .directory, let next = nodes[current]!.entries[String(component)] else { return nil }
                current = next
            }
            return current
        }

        /// The directory that holds `path`, and the name in it.
        func parent(of path: String, call: String) throws -> (directory: Int, name: String) {
            let components = path.split(separator: "/")
            guard let name = components.last else { throw SystemCallError(call, path: path, code: EEXIST) }
            guard let directory = lookup(components.dropLast().joined(separator: "/")) else {
                throw SystemCallError(call, path: path, code: ENOENT)
            }
            guard nodes[directory]!.kind == .directory else { throw SystemCallError(call, path: path, code: ENOTDIR) }
            return (directory, String(name))
        }

        func node(at path: String, call: String) throws -> Node {
            guard let id = lookup(path) else { throw SystemCallError(call, path: path, code: ENOENT) }
            return nodes[id]!
        }

        func node(of descriptor: Int32, call: String) throws -> Node {
            guard let open = descriptors[descriptor] else { throw SystemCallError(call, code: EBADF) }
            return nodes[open.node]!
        }

        func status(of node: Node) -> FileStatus {
            FileStatus(
                kind: node.kind == .file ? .regular : .directory,
                size: Int64(node.kind == .file ? node.data.count : 4_096),
                permissions: node.permissions
            )
        }

        // MARK: Calls

        mutating func record(_ effects: [Int: [(name: String, node: Int?)]]) {
            let id = nextChange
            nextChange += 1
            changes[id] = EntryChange(effects: effects)
            for (directory, list) in effects {
                for effect in list { nodes[directory]!.entries[effect.name] = effect.node }
                nodes[directory]!.pendingEntries.append(id)
            }
        }

        mutating func newNode(_ kind: Node.Kind, permissions: mode_t) -> Int {
            let id = nextNode
            nextNode += 1
            nodes[id] = Node(kind: kind, permissions: permissions & 0o777)
            return id
        }

        mutating func open(_ path: String, flags: Int32, mode: mode_t) throws -> Int32 {
            let access = flags & O_ACCMODE
            let isWritable = access == O_WRONLY || access == O_RDWR
            let id: Int
            if let existing = lookup(path) {
                if flags & O_CREAT != 0, flags & O_EXCL != 0 { throw SystemCallError("open", path: path, code: EEXIST) }
                if nodes[existing]!.kind == .directory {
                    if isWritable { throw SystemCallError("open", path: path, code: EISDIR) }
                } else {
                    if flags & O_DIRECTORY != 0 { throw SystemCallError("open", path: path, code: ENOTDIR) }
                    if flags & O_TRUNC != 0, isWritable {
                        nodes[existing]!.data = []
                        nodes[existing]!.pendingData.append(.truncate(length: 0))
                    }
                }
                id = existing
            } else {
                guard flags & O_CREAT != 0 else { throw SystemCallError("open", path: path, code: ENOENT) }
                let (directory, name) = try parent(of: path, call: "open")
                id = newNode(.file, permissions: mode)
                record([directory: [(name, id)]])
            }
            let descriptor = nextDescriptor
            nextDescriptor += 1
            descriptors[descriptor] = Descriptor(
                node: id, isReadable: access == O_RDONLY || access == O_RDWR, isWritable: isWritable, appends: flags & O_APPEND != 0
            )
            return descriptor
        }

        mutating func close(_ descriptor: Int32) throws {
            guard let open = descriptors.removeValue(forKey: descriptor) else { throw SystemCallError("close", code: EBADF) }
            if locks[open.node] == descriptor { locks[open.node] = nil }
        }

        mutating func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
            guard let open = descriptors[descriptor], open.isReadable else { throw SystemCallError("read", code: EBADF) }
            let node = nodes[open.node]!
            guard node.kind == .file else { throw SystemCallError("read", code: EISDIR) }
            let count = max(0, min(buffer.count, node.data.count - open.offset))
            if count > 0 {
                node.data[open.offset..<(open.offset + count)].withUnsafeBytes { source in
                    buffer.copyMemory(from: source)
                }
            }
            descriptors[descriptor]!.offset += count
            return count
        }

        /// `pread`: reads at `offset`, leaving the descriptor's offset alone.
        func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
            guard let open = descriptors[descriptor], open.isReadable else { throw SystemCallError("pread", code: EBADF) }
            let node = nodes[open.node]!
            guard node.kind == .file else { throw SystemCallError("pread", code: EISDIR) }
            let count = max(0, min(buffer.count, node.data.count - offset))
            if count > 0 {
                node.data[offset..<(offset + count)].withUnsafeBytes { source in
                    buffer.copyMemory(from: source)
                }
            }
            return count
        }

        mutating func write(_ descriptor: Int32, bytes: [UInt8]) throws -> Int {
            guard let open = descriptors[descriptor], open.isWritable else { throw SystemCallError("write", code: EBADF) }
            let offset = open.appends ? nodes[open.node]!.data.count : open.offset
            Self.apply(.write(offset: offset, bytes: bytes), to: &nodes[open.node]!.data)
            nodes[open.node]!.pendingData.append(.write(offset: offset, bytes: bytes))
            descriptors[descriptor]!.offset = offset + bytes.count
            return bytes.count
        }

        /// `pwrite`: writes at `offset`, leaving the descriptor's offset alone.
        mutating func write(_ descriptor: Int32, bytes: [UInt8], at offset: Int) throws -> Int {
            guard let open = descriptors[descriptor], open.isWritable else { throw SystemCallError("pwrite", code: EBADF) }
            Self.apply(.write(offset: offset, bytes: bytes), to: &nodes[open.node]!.data)
            nodes[open.node]!.pendingData.append(.write(offset: offset, bytes: bytes))
            return bytes.count
        }

        /// `ftruncate`: cuts the file, or extends it with zeros, to `length` bytes.
        mutating func truncate(_ descriptor: Int32, to length: Int) throws {
            guard let open = descriptors[descriptor], open.isWritable else { throw SystemCallError("ftruncate", code: EBADF) }
            Self.apply(.truncate(length: length), to: &nodes[open.node]!.data)
            nodes[open.node]!.pendingData.append(.truncate(length: length))
        }

        mutating func synchronize(_ descriptor: Int32) throws {
            guard let open = descriptors[descriptor] else { throw SystemCallError("fsync", code: EBADF) }
            if nodes[open.node]!.kind == .directory {
                synchronizeDirectory(open.node)
            } else {
                nodes[open.node]!.durableData = nodes[open.node]!.data
                nodes[open.node]!.pendingData = []
            }
        }

        mutating func synchronizeDirectory(_ path: String) throws {
            guard let id = lookup(path) else { throw SystemCallError("open", path: path, code: ENOENT) }
            guard nodes[id]!.kind == .directory else { throw SystemCallError("open", path: path, code: ENOTDIR) }
            synchronizeDirectory(id)
        }

        mutating func synchronizeDirectory(_ id: Int) {
            while let first = nodes[id]!.pendingEntries.first {
                commit(first)
            }
        }

        /// Makes a directory change durable, after the changes made before it in each
        /// directory it touches (change numbers grow with time, so this never loops).
        mutating func commit(_ id: Int) {
            guard let change = changes[id] else { return }
            for directory in change.effects.keys.sorted() {
                while let first = nodes[directory]!.pendingEntries.first, first != id {
                    commit(first)
                }
            }
            for (directory, list) in change.effects {
                for effect in list { nodes[directory]!.durableEntries[effect.name] = effect.node }
                nodes[directory]!.pendingEntries.removeFirst()
            }
            changes[id] = nil
        }

        mutating func rename(_ source: String, to destination: String) throws {
            guard let id = lookup(source) else { throw SystemCallError("rename", path: source, code: ENOENT) }
            let from = try parent(of: source, call: "rename")
            let to = try parent(of: destination, call: "rename")
            if let existing = lookup(destination) {
                if existing == id { return }
                switch (nodes[id]!.kind, nodes[existing]!.kind) {
                case (.file, .directory): throw SystemCallError("rename", path: source, code: EISDIR)
                case (.directory, .file): throw SystemCallError("rename", path: source, code: ENOTDIR)
                case (.directory, .directory) where !nodes[existing]!.entries.isEmpty:
                    throw SystemCallError("rename", path: source, code: ENOTEMPTY)
                default: break
                }
            }
            if from.directory == to.directory {
                record([from.directory: [(from.name, nil), (to.name, id)]])
            } else if splitsRenames {
                record([to.directory: [(to.name, id)]])
                record([from.directory: [(from.name, nil)]])
            } else {
                record([from.directory: [(from.name, nil)], to.directory: [(to.name, id)]])
            }
        }

        mutating func link(_ existing: String, as newName: String) throws {
            guard let id = lookup(existing) else { throw SystemCallError("link", path: newName, code: ENOENT) }
            guard nodes[id]!.kind == .file else { throw SystemCallError("link", path: newName, code: EPERM) }
            guard lookup(newName) == nil else { throw SystemCallError("link", path: newName, code: EEXIST) }
            let (directory, name) = try parent(of: newName, call: "link")
            record([directory: [(name, id)]])
        }

        mutating func unlink(_ path: String) throws {
            guard let id = lookup(path) else { throw SystemCallError("unlink", path: path, code: ENOENT) }
            guard nodes[id]!.kind == .file else { throw SystemCallError("unlink", path: path, code: EISDIR) }
            let (directory, name) = try parent(of: path, call: "unlink")
            record([directory: [(name, nil)]])
        }

        mutating func makeDirectory(_ path: String, mode: mode_t) throws {
            guard lookup(path) == nil else { throw SystemCallError("mkdir", path: path, code: EEXIST) }
            let (directory, name) = try parent(of: path, call: "mkdir")
            record([directory: [(name, newNode(.directory, permissions: mode))]])
        }

        mutating func lock(_ descriptor: Int32, operation: Int32) throws {
            guard let open = descriptors[descriptor] else { throw SystemCallError("flock", code: EBADF) }
            if operation & LOCK_UN != 0 {
                if locks[open.node] == descriptor { locks[open.node] = nil }
                return
            }
            if let holder = locks[open.node], holder != descriptor {
                throw SystemCallError("flock", code: EWOULDBLOCK)
            }
            locks[open.node] = descriptor
        }

        // MARK: Power cuts

        static func apply(_ change: DataChange, to data: inout [UInt8]) {
            switch change {
            case .write(let offset, let bytes):
                if data.count < offset + bytes.count {
                    data.append(contentsOf: repeatElement(0, count: offset + bytes.count - data.count))
                }
                data.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
            case .truncate(let length):
                if data.count > length {
                    data.removeSubrange(length...)
                } else {
                    data.append(contentsOf: repeatElement(0, count: length - data.count))
                }
            }
        }

        /// The durable state plus a random subset of the pending changes (see the type's
        /// description), as a model with nothing pending.
        func cut(seed: UInt64) -> Model {
            var random = SeededGenerator(seed: seed)
            var result = Model()
            result.nextNode = nextNode
            result.splitsRenames = splitsRenames
            for id in nodes.keys.sorted() {
                var node = nodes[id]!
                var data = node.durableData
                for change in node.pendingData {
                    switch change {
                    case .truncate:
                        if Bool.random(using: &random) { Self.apply(change, to: &data) }
                    case .write(let offset, let bytes):
                        switch Int.random(in: 0..<4, using: &random) {
                        case 0: break
                        case 1: Self.apply(change, to: &data)
                        case 2:
                            let kept = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &random)
                            Self.apply(.write(offset: offset, bytes: Array(bytes.prefix(kept))), to: &data)
                        default:
                            var torn = bytes
                            if !torn.isEmpty {
                                let start = Int.random(in: 0..<torn.count, using: &random)
                                let end = Int.random(in: (start + 1)...torn.count, using: &random)
                                let zeros = Bool.random(using: &random)
                                for index in start..<end { torn[index] = zeros ? 0 : UInt8.random(in: 0...255, using: &random) }
                            }
                            Self.apply(.write(offset: offset, bytes: torn), to: &data)
                        }
                    }
                }
                node.data = data
                node.durableData = data
                node.pendingData = []
                node.entries = node.durableEntries
                node.pendingEntries = []
                result.nodes[id] = node
            }
            for id in changes.keys.sorted() where Bool.random(using: &random) {
                for (directory, list) in changes[id]!.effects {
                    for effect in list { result.nodes[directory]!.entries[effect.name] = effect.node }
                }
            }
            for id in result.nodes.keys {
                result.nodes[id]!.durableEntries = result.nodes[id]!.entries
            }
            return result
        }

        func snapshot() -> [String: [UInt8]?] {
            var result: [String: [UInt8]?] = [:]
            var stack = [("", Self.root)]
            while let (path, id) = stack.popLast() {
                let node = nodes[id]!
                if node.kind == .file {
                    result[path] = .some(node.data)
                    continue
                }
                result[path.isEmpty ? "/" : path] = .some(nil)
                for (name, child) in node.entries { stack.append((path + "/" + name, child)) }
            }
            return result
        }
    }
}

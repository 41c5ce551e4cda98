// What the documentation examples of `PersistentOperations` leave undefined: the app's own
// types and objects they talk about, stubbed with the types the prose implies. Used by
// scripts/doc-examples.py; compiled, never run.
import Foundation
import RetryingOperation
import PersistentOperations

/// Examples written inside a subclass run in a subclass of this.
class ExampleOperation: RetryingOperation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
}

struct Upload: Codable, Sendable {
    var file: URL
    var attempt: Int
}

final class UploadOperation: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.upload"
    let payload: Upload
    init(payload: Upload) { self.payload = payload; super.init() }
    init(payload: Upload, client: APIClient) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}

/// A framework's download operation the app does not own (the stored wrapper's example).
class DownloadOperation: Operation, @unchecked Sendable {
    let url: URL
    var statusCode = 0
    init(url: URL) { self.url = url }
}
enum DownloadError: Error {
    case notFound
    case status(Int)
}

/// What an earlier version of the app stored for an upload, and a payload it stored.
struct UploadV1: Codable { var file: URL }
var stored: StoredPayload { fatalError("compiled, never run") }

/// A service the app's operations use, which a registered factory passes in.
final class APIClient: Sendable {
    init(baseURL: URL) {}
}
var serverURL: URL { URL(string: "https://api.example.com")! }

struct Message: Codable, Sendable {
    var chatID: Int
    var text: String
}

final class SendMessage: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.send-message"
    let payload: Message
    init(payload: Message) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}
var message: Message { Message(chatID: 42, text: "Hi") }
var drafts: [Message] { [message] }

struct Sync: Codable, Sendable { var since: Date? }

final class SyncOperation: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.sync"
    let payload: Sync
    init(payload: Sync) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}

struct AlbumPayload: Codable, Sendable { var name: String }
struct PhotoPayload: Codable, Sendable { var file: URL; var album: String }

final class CreateAlbum: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.create-album"
    let payload: AlbumPayload
    init(payload: AlbumPayload) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}

final class UploadPhoto: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.upload-photo"
    let payload: PhotoPayload
    init(payload: PhotoPayload) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}

final class PublishAlbum: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.publish-album"
    let payload: AlbumPayload
    init(payload: AlbumPayload) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}

final class Logger: Sendable {
    func debug(_ text: String) {}
    func warning(_ text: String) {}
}
struct Network: Sendable { var isReachable: Bool { true } }
final class Badge: @unchecked Sendable { var value = 0 }

var queue: PersistentOperationQueue { fatalError("compiled, never run") }
var store: ReadOnlyPersistentStore { fatalError("compiled, never run") }
var failed: FailedOperationInfo { fatalError("compiled, never run") }
var record: StoredOperationRecord { fatalError("compiled, never run") }
var operation: UploadOperation { UploadOperation(payload: upload) }
var upload: Upload { Upload(file: photo, attempt: 0) }
var payload: Upload { upload }
var sync: Sync { Sync(since: nil) }
var id: PersistentOperationID { PersistentOperationID("6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21")! }
var storeURL: URL { URL(fileURLWithPath: "/tmp/uploads-store") }
var appSupport: URL { URL(fileURLWithPath: "/tmp/Application Support") }
var photo: URL { URL(fileURLWithPath: "/tmp/photo.jpg") }
var photos: [URL] { [photo] }
let sharedStoreURL = URL(fileURLWithPath: "/tmp/group.com.example/Outbox")
var uploads: OperationQueue { OperationQueue() }
var tonight: Date { Date().addingTimeInterval(12 * 3600) }
var logger: Logger { Logger() }
var network: Network { Network() }
var badge: Badge { Badge() }
func upload(_ file: URL, completion: @escaping @Sendable ((any Error)?) -> Void) {}
var online: ManualRunCondition { ManualRunCondition() }

/// A background task as the system hands one to an app (the BackgroundTasks framework's
/// `BGTask` has an `expirationHandler` and `setTaskCompleted(success:)`).
final class BackgroundTask: @unchecked Sendable {
    var expirationHandler: (@Sendable () -> Void)?
    func setTaskCompleted(success: Bool) {}
}
var task: BackgroundTask { BackgroundTask() }
func scheduleAnotherRun(earliest: Date) {}

struct Catalogue: Codable, Sendable {}

final class RefreshCatalogue: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.refresh-catalogue"
    let payload: Catalogue
    init(payload: Catalogue) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { true }
}
